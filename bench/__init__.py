"""queuelog benchmark harness.

Run ``python -m bench.run [--quick] [--out bench/results]`` from the repository
root.  Everything here measures *ratios taken side by side in one run*: the
machine is small and shared, so absolute figures from different runs are not
comparable and nothing in here ever fails on speed.
"""
