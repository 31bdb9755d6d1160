"""Each lesson's exercises, `NN.py`: the starter text a learner fills in (STARTER) and the checks (CHECKS) that
`python -m tinygrad_block check NN` runs; common.py holds what the checkers share. tinygrad_block/course.py loads
them from here by path: they belong to the course in the repository, not to the installed package."""
