"""The search loop the proxy runs for a model that calls tools: OpenAI's hosted file search."""
