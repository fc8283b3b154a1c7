"""SGLang 0.5.23's logs: the adapter that feeds a followed log to the reader (`lines`)."""
