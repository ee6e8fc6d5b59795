"""What happens to a chat request before it is forwarded: the exchange, the stages, the decision."""
