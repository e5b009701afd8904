from fusegen.cli.main import main

main()
