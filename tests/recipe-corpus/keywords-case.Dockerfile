from alpine As base
Run echo hi
copy a b
eNv A=1
