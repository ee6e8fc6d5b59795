"""OpenAI's vector stores on the proxy: records, persistence, indexing jobs, search."""
