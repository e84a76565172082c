(proc p (nodes) (symbols) (body (comment "bad \q escape")))
