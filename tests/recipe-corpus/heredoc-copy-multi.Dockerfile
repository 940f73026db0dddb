FROM alpine
COPY --chmod=644 <<robots.txt <<humans.txt ./local.txt /usr/share/nginx/html/
(robots content)
robots.txt
(humans content)
humans.txt
RUN ls
