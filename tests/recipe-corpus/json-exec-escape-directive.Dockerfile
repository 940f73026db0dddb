# escape=`
FROM mcr.microsoft.com/windows/servercore
RUN ["c:\\windows\\system32\\tasklist.exe"]
