"""A run directory: what a run writes there and reads back.

    record.py   config.json: the settings record, its reader (for resumes and aggregation:
                settings added since a run was recorded, dotted names), atomic JSON writes
    files.py    the CSV logs, <seed>.txt, done.json and diverged.json, cut back on a resume
    lock.py     the lock a training process holds on its run directory
    resume.py   what --resume does with what a directory holds: start, resume, or refuse

None of these imports the command line (absl flags): analysis/ reads runs through record.py.
"""
