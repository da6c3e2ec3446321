"""The API dialects, one folder each: its request bodies and their parse (`protocol.py`), its
wire format (`render.py`, a BaseRender over typed output deltas) and its routes (`routes.py`,
`add_routes(app, ctx)`), all over the one serving pipeline (server/serving.py)."""
