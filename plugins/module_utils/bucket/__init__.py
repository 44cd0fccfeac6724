"""The S3 image mirror and the public-bucket trap (seed 001): key layout, immutability, the one multipart
upload, and anonymous readability.
"""
