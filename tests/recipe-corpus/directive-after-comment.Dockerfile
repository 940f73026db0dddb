# About my dockerfile
# escape=`
FROM x
RUN a \
b
