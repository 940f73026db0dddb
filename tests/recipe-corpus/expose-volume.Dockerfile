FROM x
EXPOSE 80/udp 443 8000-8010/tcp
VOLUME /myvol
VOLUME ["/data", "/var/log"]
VOLUME /a /b
