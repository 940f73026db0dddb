# escape=\
FROM x
RUN a \
  b
