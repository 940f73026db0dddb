FROM x
RUN 3<<EOF cat /dev/fd/3
x
EOF
