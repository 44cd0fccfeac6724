"""Repaving running databases (seed 000): drift, the roll-out plan, the direct and the operator paths, and
the DBInstances they act on.
"""
