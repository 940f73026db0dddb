FROM x
RUN <<EOF   
ls
EOF
