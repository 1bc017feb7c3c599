"""Pictures: the camera's frames with each turn, and tools that return images."""
