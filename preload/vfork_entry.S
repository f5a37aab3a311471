/* vfork on x86-64: record "a vfork child may be running on this thread"
   (so wrappers called in the child leave xpress state alone), then jump to
   the real vfork with our caller's return address still on the stack, so the
   child and the parent both return straight to the caller. */
#if defined(__x86_64__)
	.text
	.globl	vfork
	.type	vfork, @function
vfork:
	.cfi_startproc
	subq	$8, %rsp            /* keep the stack 16-byte aligned for the call */
	.cfi_adjust_cfa_offset 8
	call	xp_vfork_prepare    /* returns the real vfork in %rax */
	addq	$8, %rsp
	.cfi_adjust_cfa_offset -8
	jmp	*%rax
	.cfi_endproc
	.size	vfork, .-vfork
#endif
	.section .note.GNU-stack,"",@progbits
