"""The folders the commands write and read: `run_folder` (a pretraining run or model folder and its records),
`output_folder` (atomic replacement of a command's output) and `manifest` (what a command wrote, so that it deletes
only that).
"""
