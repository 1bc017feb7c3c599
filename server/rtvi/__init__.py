"""The RTVI protocol: client and server message models, the handler, pipeline events as
messages, the UI worker, the system log."""
