"""The S3 backend: the one boto3 client factory and retry policy, and the S3 modules' options."""
