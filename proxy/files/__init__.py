"""The file store behind the Files API."""
