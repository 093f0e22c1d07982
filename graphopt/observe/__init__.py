"""What a compile and a run tell their user: the optimization report, the profiler, the
drawings and notebook displays, and progress lines."""
