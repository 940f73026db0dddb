#  ESCAPE = `
FROM x
RUN a `
b
