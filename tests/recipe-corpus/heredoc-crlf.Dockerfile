FROM x
COPY <<EOF /f
line
EOF
USER u
