"""The run machinery below the scripts of launch/: a run's configuration and command line
(config, cli), its directory and record (rundir), checkpoints, the resume decision, dashboards,
diagnostics logging, the event application, Ctrl-C and error handling, memory checks, and the
RL training loop (train, runner). launch/ holds only the scripts that use it."""
