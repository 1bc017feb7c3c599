"""This server process: its figures from /proc (CPU, memory, descriptors, threads), the
event loop's lag, and giving memory back when idle. Below media and sessions."""
