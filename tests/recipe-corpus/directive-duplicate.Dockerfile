# escape=\
# escape=`
FROM x
