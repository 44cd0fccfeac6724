"""The Kubernetes backend: the module-facing client, its auth and raw read path, list pages, the API kinds
and their accessors, applying object lists, Jobs that work on claims.
"""
