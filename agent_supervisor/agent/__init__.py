"""``supervisor agent``: the worker node's side of an engine across boxes.

``rank.py`` runs the node's headless rank (the head's orders: start, stop); ``node.py``
samples the node and keeps its own memory-floor kill; ``app.py`` serves both over HTTP
(bearer token) on the node's interconnect address.
"""
