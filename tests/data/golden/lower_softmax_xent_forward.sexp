(proc softmax_xent_fwd_single
  (nodes
    (node 9031 (label "logits") single (dims 4 5))
    (node 9032 (label "onehot") single (dims 4 5))
    (node 9033 (label "bsz") single (dims))
    (node 9034 (label "m") single (dims 4))
    (node 9035 (label "z") single (dims 4 5))
    (node 9036 (label "e") single (dims 4 5))
    (node 9037 (label "s") single (dims 4))
    (node 9038 (label "lse") single (dims 4))
    (node 9039 (label "picked") single (dims 4))
    (node 9040 (label "nll") single (dims 4))
    (node 9041 (label "loss") single (dims)))
  (symbols
    (sym 0 i0)
    (sym 1 i1)
    (sym 2 i2)
    (sym 3 i3)
    (sym 4 i4)
    (sym 5 i5)
    (sym 6 i6)
    (sym 7 i7)
    (sym 8 i8)
    (sym 9 i9)
    (sym 10 i10)
    (sym 11 i11)
    (sym 12 i12)
    (sym 13 i13))
  (body
    (seq
      (comment "softmax cross-entropy forward")
      (set 9033 () 4)
      (for i2 0 3
        (set 9034 (i2) -inf))
      (for i0 0 3
        (for i1 0 4
          (set 9034 (i0) (max (get 9034 (i0)) (identity (get 9031 (i0 i1)))))))
      (for i3 0 3
        (for i4 0 4
          (set 9035 (i3 i4) (sub (get 9031 (i3 i4)) (get 9034 (i3))))))
      (for i5 0 3
        (for i6 0 4
          (set 9036 (i5 i6) (exp (get 9035 (i5 i6))))))
      (zero_out 9037)
      (for i7 0 3
        (for i8 0 4
          (set 9037 (i7) (add (get 9037 (i7)) (identity (get 9036 (i7 i8)))))))
      (for i9 0 3
        (set 9038 (i9) (log (get 9037 (i9)))))
      (zero_out 9039)
      (for i10 0 3
        (for i11 0 4
          (set 9039 (i10) (add (get 9039 (i10)) (mul (get 9032 (i10 i11)) (get 9035 (i10 i11)))))))
      (for i12 0 3
        (set 9040 (i12) (sub (get 9038 (i12)) (get 9039 (i12)))))
      (zero_out 9041)
      (for i13 0 3
        (set 9041 () (add (get 9041 ()) (div (get 9040 (i13)) (get 9033 ())))))
      (comment "end"))))
