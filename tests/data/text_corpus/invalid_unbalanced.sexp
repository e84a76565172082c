(proc p (nodes (node 1 (label x) single (dims 2 3))) (symbols (sym 0 i)) (body (for i 0 1 (set 1 (i 0) 1.0))
