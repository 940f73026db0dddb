FROM x
RUN <<EOF
echo never ends
