"""One module per command: its one options type and its use case, returning a typed report."""
