"""The serving room: the HTTP server and its API dialects, the offline Engine, results
for clients, the router and its placement policies, Ray Serve, and web security."""
