FROM x
RUN --mount=type=cache,target=/c \
    --netwrk=none true
