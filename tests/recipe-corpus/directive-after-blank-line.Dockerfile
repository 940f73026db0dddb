
# escape=`
FROM x
COPY a`b c
