(proc p (nodes (node 1 (label x) single (dims 2)) (node 1 (label y) single (dims 2))) (symbols) (body (noop)))
