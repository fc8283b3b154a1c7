"""Every rendering of a command's report: tables, JSON documents, CI reports, bucket/flag files, plots."""
