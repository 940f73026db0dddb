FROM x
ONBUILD ADD . /app/src
ONBUILD RUN /usr/local/bin/python-build --dir /app/src
onbuild copy --from=builder /out \
    /usr/bin/
