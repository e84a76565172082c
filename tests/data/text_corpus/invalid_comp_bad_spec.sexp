(comp (nodes (node 1 (label) single (dims 2 3))) (symbols) (embedded) (body (accum_op 1 add identity (1) "ij=>ji")))
