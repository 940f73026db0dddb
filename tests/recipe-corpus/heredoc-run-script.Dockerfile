FROM x
RUN <<EOF
#!/usr/bin/env python3
print("hi")
EOF
RUN <<EOF
apt-get update
apt-get install -y vim
EOF
