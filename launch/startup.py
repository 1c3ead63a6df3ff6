"""Imported by each script of `launch/` before its other imports: holds a Ctrl-C that comes
while the libraries are imported until the script's main is ready for it (`launch.ctrl_c`)."""

from launch import ctrl_c

ctrl_c.hold()
