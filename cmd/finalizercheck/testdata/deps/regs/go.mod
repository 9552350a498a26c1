module example.com/regs

go 1.24
