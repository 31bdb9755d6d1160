"""Each lesson's exercises: the starter a learner fills in, `starters/NN.py`, and its grader, `NN.py`, with the
checks (CHECKS) that `python -m tinygrad_block check NN` runs; common.py holds what the graders share.
lessons/course.py loads them from here by path: they belong to the course in the repository, not to the installed
package."""
