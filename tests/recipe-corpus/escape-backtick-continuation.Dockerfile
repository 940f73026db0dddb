# escape=`
FROM x
RUN echo a `
    b `
  c
ENV P=C:\dir\sub Q=a`"b
