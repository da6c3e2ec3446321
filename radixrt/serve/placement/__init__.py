"""Routing policies over replicas (`--dp` schedulers or the router's worker servers): which one
gets a request, by prefix match, load or session. Used by both front ends; knows no HTTP."""
