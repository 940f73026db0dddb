FROM x
CMD ["echo", "\"quoted\"", "back\\slash", "tab\t", "\u00e9"]
