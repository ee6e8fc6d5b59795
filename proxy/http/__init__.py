"""The HTTP face of the proxy: app assembly, routes, middleware, the status channel."""
