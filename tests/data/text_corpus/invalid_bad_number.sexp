(proc p (nodes (node 1 (label x) single (dims 2))) (symbols) (body (set 1 (0) 1.2.3)))
