"""What every domain shares: the error base and the one exit, input rules, redaction, the wait runner and the
retry layer, short rounds, fleet-sized report helpers.
"""
