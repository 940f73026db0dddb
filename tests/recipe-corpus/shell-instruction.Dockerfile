FROM microsoft/windowsservercore
SHELL ["powershell", "-command"]
RUN Write-Host hello
SHELL ["cmd", "/S", "/C"]
