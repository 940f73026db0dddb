FROM x
RUN --mount=type=cache,target=/root/.cache/pip \
    --mount=type=bind,source=requirements.txt,target=/tmp/req.txt \
    --network=none --device=nvidia.com/gpu=all --security=sandbox \
    pip install -r /tmp/req.txt
RUN --mount=type=tmpfs,target=/tmp -- --weird-command
RUN --mount="type=bind,source=a b,target=/c" true
