"""Parley pipeline: audio in, conversation, audio out."""
