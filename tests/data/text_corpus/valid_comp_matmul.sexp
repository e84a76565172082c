(comp
  (nodes
    (node 9301 (label "x") single (dims 2 3))
    (node 9302 (label "w") single (dims 3 4))
    (node 9303 (label "y") single (dims 2 4)))
  (symbols)
  (embedded)
  (body
    (block_comment "matmul"
      (accum_op 9303 add mul (9301 9302) "bi,ij=>bj" initialize_neutral))))
