"""Each lesson's exercises (`exNN.py`): the starter text a learner fills in, and the checks run by
`python -m tinygrad_block check NN`."""
