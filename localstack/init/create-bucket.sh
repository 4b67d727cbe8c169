#!/bin/bash
# LocalStack "ready" hook: create tierlog's bucket(s). TIERLOG_BUCKETS is a space- or
# comma-separated list (default: tierlog). Safe to run again: existing buckets are kept.
set -euo pipefail
for bucket in ${TIERLOG_BUCKETS//,/ }; do
  if awslocal s3api head-bucket --bucket "$bucket" 2>/dev/null; then
    echo "tierlog: bucket $bucket already exists"
  else
    awslocal s3api create-bucket --bucket "$bucket" >/dev/null
    echo "tierlog: created bucket $bucket"
  fi
done
